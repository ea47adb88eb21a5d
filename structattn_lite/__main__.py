from structattn_lite.cli import main

raise SystemExit(main())
