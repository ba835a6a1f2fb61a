"""passes stage of the Cherenkov pipeline."""
