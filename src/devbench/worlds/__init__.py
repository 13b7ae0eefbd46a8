"""Distributed worlds: ranks spawned or joined under torchrun, the collectives sweep, the fleet run."""
