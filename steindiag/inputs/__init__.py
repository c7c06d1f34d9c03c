"""Input layer: data + score source -> ``SteinInput``."""
