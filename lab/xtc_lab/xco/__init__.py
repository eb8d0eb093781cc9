"""Lab side of XCo: topology generators and the scheduler benchmark (not part of the product)."""
