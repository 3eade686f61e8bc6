from noloco.cli import main

raise SystemExit(main())
