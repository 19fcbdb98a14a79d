"""Helpers of the OpenAI Agents session tests: a scripted model (no network)
and the child process the kill test runs."""
