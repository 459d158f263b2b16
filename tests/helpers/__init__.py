"""Test fixtures outside the product: the local task launcher and the SSH test hosts."""
