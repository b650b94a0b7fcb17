"""The core RLM engine: loop, budgets, events, model clients, sandboxes."""
