"""Models a user can choose: the curated catalogue, downloads from the Hugging Face Hub, and
`--model` resolution with the per-model settings the llama.cpp backend applies (docs/models.md)."""
