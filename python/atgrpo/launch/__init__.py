"""Starting a run's processes: `local` spawns one learner and N actors on this host."""
