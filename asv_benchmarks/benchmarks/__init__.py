"""Benchmarks of skprivfact, run with asv (see ../asv.conf.json)."""
