"""Workloads: plain functions that do the work and check it. They never import asv."""
