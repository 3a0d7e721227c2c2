"""Master/slave interaction: HTTP between the coordinator and its workers."""
