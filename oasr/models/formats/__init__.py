"""Readers for native checkpoint container formats shared by several families."""
