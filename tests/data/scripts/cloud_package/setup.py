"""The training package, as a cloud platform's custom-job samples ship it (python -m trainer.task)."""
from setuptools import find_packages, setup

setup(
    name='trainer',
    version='0.1',
    packages=find_packages(),
    include_package_data=True,
    description='Digits classifier, multi-worker',
)
