"""XTC training tool."""
