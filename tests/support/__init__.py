"""What the tests share: harnesses, fakes and helpers."""
