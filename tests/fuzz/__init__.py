"""The seeded schedule fuzzer and the fault matrix (see harness.py)."""
