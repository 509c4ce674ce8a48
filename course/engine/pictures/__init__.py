"""What a lesson's pictures are made of: attention maps, shape traces and figures, as data."""
