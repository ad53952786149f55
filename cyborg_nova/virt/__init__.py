"""The Nova virt-driver extension (needs Nova importable)."""
