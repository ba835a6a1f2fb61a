"""codegen stage of the Cherenkov pipeline."""
