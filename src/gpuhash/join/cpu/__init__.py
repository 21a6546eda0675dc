"""The join's CPU engine (the build and probe over a MultiMap's table, the radix join)."""
