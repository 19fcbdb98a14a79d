"""A real LangGraph graph for the checkpointer tests and benchmark: no network, scripted model."""
