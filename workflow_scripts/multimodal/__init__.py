"""Multimodal intermediate tasks (docs/protocol.md §9): images, their features, and the synthetic
image world the offline demo renders."""
