from nri_cpumgr.boot import main

raise SystemExit(main())
