"""lowering stage of the Cherenkov pipeline."""
