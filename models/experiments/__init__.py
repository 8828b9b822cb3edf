"""Dated one-off measurements (README.md here): run from models/ as `python3 -m experiments.<name>`."""
