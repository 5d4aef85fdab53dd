from nri_cpumgr.cli import main

raise SystemExit(main())
