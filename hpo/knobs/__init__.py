"""knobs"""
