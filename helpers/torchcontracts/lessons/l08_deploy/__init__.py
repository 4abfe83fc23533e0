"""Lesson 08: Deployment: saving, torch.export, ONNX in a real runtime, quantization, serving (deploy, lab06_deployment, lab06_judges, lab06_models, tryit)."""
