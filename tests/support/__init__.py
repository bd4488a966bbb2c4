"""Support code for the test suite: fake servers, rigs, receivers, fixtures."""
