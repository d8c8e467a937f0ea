"""Model preparation: any configured checkpoint source becomes a folder (or hub id) that vLLM serves."""
