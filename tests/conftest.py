"""Suite-wide test settings.

Hypothesis's per-example deadline (200 ms by default) is off for every property test: the
properties are about decisions, not time, and on a loaded 2-CPU machine a single example's
first call can take longer (a cold import, a busy CPU), which Hypothesis reports as a flaky
failure. Speed is measured in benchmarks/, never in tests.
"""

from hypothesis import settings

settings.register_profile("nri-cpumgr", deadline=None)
settings.load_profile("nri-cpumgr")
