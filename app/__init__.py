"""Enverif: a GraphQL API server for running LLM agents durably and safely."""
