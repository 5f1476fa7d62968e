"""The route_qa task's composition: SFT traces with executed tools, the bag-of-words baseline, the evaluation of
routing policies on the test split (``docs/route_qa.md``)."""
