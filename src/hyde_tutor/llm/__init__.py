"""LLM backends (API, compatible server, embedded llama.cpp, replay), one text generation helper, recordings."""
