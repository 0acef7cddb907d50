"""Outputs: HTML, JSON, JUnit XML and Markdown, all rendered from the store."""
