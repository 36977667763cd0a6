from indexer.cli import main

raise SystemExit(main())
