"""Your work: one labNN_topic.py of stubs per lab; grade it with `python -m labkit.grade`."""
