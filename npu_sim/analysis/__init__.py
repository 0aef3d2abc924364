"""What is measured on an integer program: check, cost, accuracy, advisor, compare."""
