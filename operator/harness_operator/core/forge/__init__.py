"""The forge loop's pure core: deliveries read and verified, what they start, what the forge is told."""
