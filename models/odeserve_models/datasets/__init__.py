"""Data: fetch the Debian package lists, build the datasets and translation pairs, the test sample."""
