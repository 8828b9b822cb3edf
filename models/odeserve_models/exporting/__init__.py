"""Export: trained runs -> served model folders (repository/), the test repository and hash test
vectors of the C++ tests, and the server's bfloat16 weight counts."""
