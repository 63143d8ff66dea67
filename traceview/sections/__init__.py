"""The report's sections: each module computes one part of the analyze document."""
