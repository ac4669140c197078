"""Nodes of devices, the fabric between nodes, and collective costs over them."""
