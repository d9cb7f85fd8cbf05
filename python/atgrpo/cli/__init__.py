"""Entry points, one `main()` per process: atgrpo-train, atgrpo-learner, atgrpo-actor (and atgrpo-bench)."""
