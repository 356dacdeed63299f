"""Reference answers: labNN_topic.py with the same functions and docstrings as exercises/."""
