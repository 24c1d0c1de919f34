"""zeronode for Python: a node of a zeronode mesh."""
