"""Training dense retrievers as ORQA does: Inverse Cloze Task pre-training and early-update fine-tuning."""
