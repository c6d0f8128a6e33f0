"""Long-term memory: the LongTermMemory facade and its backends."""
