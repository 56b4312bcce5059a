"""The lab's own voice: making its training data, and training it."""
