"""Why a container got its CPUs: explanation records (:mod:`nri_cpumgr.explain.explainer`)
and the ``explain`` command (:mod:`nri_cpumgr.explain.cli`, light to import: the command
line of ``nri-cpumgr run`` is built with it)."""
