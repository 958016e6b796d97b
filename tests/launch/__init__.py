"""Deployments (launch/ and deploy/): profiles, validation, capacity, compare, restarts, images."""
