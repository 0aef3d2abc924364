"""Output for people: text, JSON and HTML/SVG."""
