"""Side-by-side benchmark of wurk against its peers: see README.md beside this file."""
