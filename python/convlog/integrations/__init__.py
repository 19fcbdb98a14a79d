"""Integrations of convlog with agent frameworks: ``openai_agents``
(``ConvlogSession``) and ``langgraph`` (``ConvlogSaver``). Import the
submodule you use; each needs its framework installed."""
