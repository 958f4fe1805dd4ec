"""Critic-guided agentic correction (RAG-Critic section 3.3): actions, planner and executor."""
