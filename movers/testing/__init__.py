"""Test doubles of the product's seams, for tests and benchmarks only: ``faulty`` (``FaultyStore``,
``SimulatedCrash``). Nothing under ``movers/`` outside this package imports it (``tests/unit/test_layout.py``)."""
