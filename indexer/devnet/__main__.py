from indexer.devnet.run import main

raise SystemExit(main())
