"""Celery side of the service: the app, the chunk task, one engine per worker process and
the worker launcher. Imports the engine, never the service."""
